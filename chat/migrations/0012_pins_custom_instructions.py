import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chat', '0011_cached_reply_imports'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='chatsession',
            name='pinned_at',
            field=models.DateTimeField(blank=True, null=True, verbose_name='pinned'),
        ),
        migrations.CreateModel(
            name='CustomInstructions',
            fields=[
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='custom_instructions', serialize=False, to=settings.AUTH_USER_MODEL)),
                ('text', models.TextField(blank=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name_plural': 'custom instructions',
            },
        ),
    ]
